"""exactlearn: exact learning of multi-head attention from value queries."""
