"""The Train form's guards: what stops the run when its records say it went wrong (see `mmcore.runs.guards`)."""
import streamlit as st

from mmcore.base.i18n import t
from mmcore.runs import guards

#: The guards the form offers as text fields (empty: off), in the order shown.
TEXT_GUARDS = ("loss_above", "reward_below", "patience", "eval_patience")


def fields():
    """Draw the guards (in an expander) and return them as {name: text} for the launch (empty fields left out);
    the launch checks them (`guards.parse`) and refuses bad ones with the reason."""
    with st.expander(t("guards.title")):
        st.caption(t("guards.intro"))
        values = {"nonfinite": "1" if st.checkbox(t("guards.nonfinite"), value=guards.Guards().nonfinite,
                                                  key="guards.nonfinite") else "0"}
        columns = st.columns(len(TEXT_GUARDS))
        for column, name in zip(columns, TEXT_GUARDS):
            unset = str(guards.Guards().patience) if name == "patience" else t("guards.off")
            text = column.text_input(t(f"guards.{name}"), key=f"guards.{name}", help=t(f"guards.{name}.help"),
                                     placeholder=unset)
            if text.strip():
                values[name] = text.strip()
    return values
