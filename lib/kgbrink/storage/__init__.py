"""Object storage: staging dumps and releases on S3-compatible stores (boto3)."""
