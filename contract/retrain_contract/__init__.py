"""Every name that crosses a boundary between retrain's parts, defined once.

`container` is the SageMaker container contract (channels, hyperparameters, metrics, paths) that the
training image, the Lambdas, the state machine's run input, the CLI and the embedded runtime share.
Pure standard library: it ships in the training image and, as a SAM layer, with every Lambda.
"""
