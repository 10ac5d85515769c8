"""What every fake service checks as the real one does (``tests/unit/test_fake_contract.py``)."""

from __future__ import annotations

from gateway.errors import InvalidRequestError


def check_request(offset: int, max_bytes: int) -> None:
    """A fetch's arguments, checked first, as :meth:`GatewayService.fetch` checks them."""
    if offset < 0:
        raise InvalidRequestError(f"offset {offset} is negative", "offset")
    if max_bytes <= 0:
        raise InvalidRequestError(f"max_bytes {max_bytes} must be positive", "max_bytes")
