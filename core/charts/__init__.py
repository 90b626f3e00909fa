"""Charts as Altair objects, with no Streamlit: the pages draw them and the HTML report embeds them."""
