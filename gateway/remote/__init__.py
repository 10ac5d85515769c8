"""The Aiven tiered-storage remote format: keys, manifest, chunk index, transforms, key ring."""
