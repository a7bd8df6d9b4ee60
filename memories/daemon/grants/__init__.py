"""AI clients: grants, the owner's grant requests, and the MCP tool calls, which answer through
:mod:`memories.daemon.search`."""
