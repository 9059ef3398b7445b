"""The package version, read by the build and by ``glm5 --version``."""

__version__ = "0.1.0"
