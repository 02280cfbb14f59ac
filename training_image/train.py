"""SageMaker entry point (contract.PROGRAM): runs retrain_training.train.run."""

import sys

from retrain_training.train import run

if __name__ == "__main__":
    sys.exit(run())
