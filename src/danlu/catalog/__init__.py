"""Catalogs that ship inside the package (GPU models, public prices). Read offline, cached."""
