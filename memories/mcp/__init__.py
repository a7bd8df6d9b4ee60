"""The MCP server (``memories mcp serve``): tool specs, schemas and argument decoding (:mod:`memories.mcp.tools`,
:mod:`memories.mcp.schemas`), the async link to the daemon (:mod:`memories.mcp.link`), the instructions
(:mod:`memories.mcp.status`), the SDK server and its stdio transport (:mod:`memories.mcp.server`,
:mod:`memories.mcp.stdio`), and the loopback HTTP endpoint (:mod:`memories.mcp.http`, :mod:`memories.mcp.endpoint`)."""
