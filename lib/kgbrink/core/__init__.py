"""The one door to the outside: settings, the SparkSession, every Delta read and write, the catalog, the
writer lease, jobs and their context, quarantine, console output and MLflow tracking."""
