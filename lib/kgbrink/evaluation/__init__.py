"""Model evaluation on the five benchmarks (issue 58): each benchmark's prompts as rows keyed for the model-call table, and the answers parsed into its scorer's predictions."""
