"""``python -m accel_operator``: run the operator (kopf) against the cluster in KUBECONFIG or
in-cluster credentials."""

import sys

from accel_operator.app import main

if __name__ == "__main__":
    sys.exit(main())
