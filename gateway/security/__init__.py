"""Who may read what (issue 16): principals, authentication (JWT bearer tokens, mTLS subjects,
API keys), Kafka-style ACLs, request-rate limits and the audit log. Framework-free: the HTTP
layer hands these modules header values and certificate subjects and maps their errors."""
