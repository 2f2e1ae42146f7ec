"""The AWS adapter (the only module allowed to import boto3): spot interruption events from SQS,
spot prices, S3 checkpoints. Not built yet; the import contracts reserve this room for it."""
