"""Money: the double-entry ledger, metering of allocations, prices and plans."""
