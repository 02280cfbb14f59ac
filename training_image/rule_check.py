"""SageMaker entry point (contract.RULE_CHECK_PROGRAM): runs retrain_training.rule_check.main."""

import sys

from retrain_training.rule_check import main

if __name__ == "__main__":
    sys.exit(main())
