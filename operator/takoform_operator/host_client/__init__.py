"""The host client: the HTTP client (httpx) for the host API and its HostPort adapter."""
