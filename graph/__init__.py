"""tramita's LangGraph state graph: state, context, routers, builder and checkpointer factory."""
