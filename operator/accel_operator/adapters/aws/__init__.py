"""The AWS adapter (the only module allowed to import boto3): EC2 interruption notices from SQS
(``interruptions``) and S3 checkpoints (``checkpoints``). Spot prices are not built yet."""
