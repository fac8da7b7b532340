"""The API's request and response models, one module per resource (docs/architecture.md)."""
