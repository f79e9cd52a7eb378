"""What both protocols' sessions share: their limits and timers, the ping and fall-behind rules,
the connection registry and what a session reports, and what a broadcast seat writes through."""
