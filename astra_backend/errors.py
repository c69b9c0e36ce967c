"""Exceptions raised by astra_backend: one-line messages naming the field, the value and what is allowed."""


class AstraError(ValueError):
    """Base class of every error astra_backend raises on bad input."""


class NetworkSpecError(AstraError):
    """A dimension, fault or network file is invalid."""


class CollectiveSpecError(AstraError):
    """A collective's kind, size, group, algorithm or options are invalid."""


class TraceSpecError(AstraError):
    """A replay trace's arrays are malformed or its nodes do not match up."""


class NoRouteError(AstraError):
    """Hard faults leave two NPUs that must talk with no path between them."""
