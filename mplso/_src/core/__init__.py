"""The loss-scaling core shared by every API family of mplso."""
