"""SageMaker entry point (contract.FREEZE_PROGRAM): runs retrain_training.freeze.main."""

import sys

from retrain_training.freeze import main

if __name__ == "__main__":
    sys.exit(main())
