"""SageMaker entry point (contract.PROGRAM), run once per host: trains in this process, or starts one
process per GPU through torchrun (retrain_training.launch), each running retrain_training.train.run."""

import sys

from retrain_training.launch import main

if __name__ == "__main__":
    sys.exit(main(__file__))
