"""kernelbook: reproducible GPU kernel performance studies."""

__version__ = "0.1.0"
