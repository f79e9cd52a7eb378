"""trio-typha: Calico's Typha fan-out proxy on Trio."""

__version__ = "0.1.0"
#: Reported in ServerHello / gRPC headers; Typha reports its build version here.
BUILD_VERSION = f"trio-typha-v{__version__}"
