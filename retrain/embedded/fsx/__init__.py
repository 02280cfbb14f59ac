"""The emulated FSx for Lustre service: file systems as local directories linked to S3, and their data
repository tasks (``emulator.py``), answered on the moto server's FSx HTTP API too (``api.py``)."""
