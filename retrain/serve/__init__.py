"""What a trained model serves: its endpoint's answers (`predict`) and the MLflow UI of the experiment
tracking (`mlflow_ui`)."""
