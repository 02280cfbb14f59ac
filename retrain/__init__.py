"""retrain: event-driven serverless retraining of image classifiers on AWS."""

__version__ = "0.1.0"
