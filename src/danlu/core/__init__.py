"""Pure building blocks shared by every capability: money, clocks, typed errors. No I/O here."""
