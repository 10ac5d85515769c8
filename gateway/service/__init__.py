"""The use cases of the gateway, framework-free: partition info, fetch, ListOffsets.

:class:`gateway.service.core.GatewayService` owns nothing framework-specific; the HTTP layer
(:mod:`gateway.api`) parses, calls one method, and renders what comes back.
"""
