"""The GCP adapter (the only module allowed to import google.cloud): TPU VM node state through
google-cloud-tpu (``tpu``)."""
