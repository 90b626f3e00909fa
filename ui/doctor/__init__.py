"""The cache doctor's page parts: its findings' sections and the fix it can apply and measure."""
