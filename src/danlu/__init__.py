"""danlu: a self-hostable GPU rental platform where renters pay only for useful GPU time."""

__version__ = "0.1.0"
