"""The MCP server (``memories mcp serve``): tool specs and argument decoding (:mod:`memories.mcp.tools`), the async
link to the daemon (:mod:`memories.mcp.link`) and the SDK session on stdio (:mod:`memories.mcp.server`)."""
