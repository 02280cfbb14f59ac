"""`retrain demo`: its flow on the embedded stack (`flow`) and its data set, the digits or photographs
written as a user's folder of labelled images (`data`)."""
