"""Small operational tools shipped inside the service image."""
