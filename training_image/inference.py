"""SageMaker inference entry point (serving.PROGRAM, code/inference.py in model.tar.gz): the handler
functions of retrain_training.serving, which the PyTorch inference toolkit calls."""

from retrain_training.serving import input_fn, model_fn, output_fn, predict_fn

__all__ = ["input_fn", "model_fn", "output_fn", "predict_fn"]
