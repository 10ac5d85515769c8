"""Confluent Schema Registry payloads: the wire format, a registry client or a snapshot folder,
and decoders of Avro, Protobuf and JSON Schema bodies into plain JSON values (issue 31)."""
