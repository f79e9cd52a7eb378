"""Python clients for both of trio-typha's protocols."""
