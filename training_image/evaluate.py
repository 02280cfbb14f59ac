"""SageMaker entry point (contract.EVALUATE_PROGRAM): runs retrain_training.evaluate.run."""

import sys

from retrain_training.evaluate import run

if __name__ == "__main__":
    sys.exit(run())
