"""Dashboard sign-in sessions that were ended on the server (sign-out), so a copied cookie stops working."""
