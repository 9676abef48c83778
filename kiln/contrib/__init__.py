"""``tvm.contrib``: graph executor and debugger."""
