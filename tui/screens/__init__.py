"""The console's screens: the runs list (:mod:`.runs`), the review queue (:mod:`.review`), both built on
:mod:`.base`, and the modal ones: the decision forms, the confirmation and help."""
