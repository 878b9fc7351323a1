// A layering violation: the check must fail on this tree.
  #  include "actors/messages.hpp"
