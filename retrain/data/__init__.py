"""What goes into the stack: labelled images (`upload`) and the weights runs start from (`pretrained`)."""
