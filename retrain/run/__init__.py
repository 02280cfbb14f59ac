"""Runs: starting one by hand (`start`) and following one to its end (`follow`)."""
