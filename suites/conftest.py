"""Suite-wide settings. The plugin (pytest_charz) provides the target, device and charz fixtures."""
