"""Language-model endpoints: OpenAI-compatible chat completions asked from Spark tasks, and their spools."""
