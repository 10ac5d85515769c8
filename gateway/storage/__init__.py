"""Object stores behind one async protocol: filesystem and S3."""
