"""Private helpers shared by every layer: array conversion and linear maps (`arrays`), argument checks
(`validate`), and the one bounded cache (`lru`). Nothing here is public API."""
