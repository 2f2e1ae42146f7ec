"""The GCP adapter (the only module allowed to import google.cloud): TPU node state and accelerator
types through google-cloud-tpu. Not built yet; the import contracts reserve this room for it."""
