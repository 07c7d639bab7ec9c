"""What every layer of the platform shares: settings, the event contract and the view declarations."""
