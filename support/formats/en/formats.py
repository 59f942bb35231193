"""English date formats with seconds and the zone: operations read times to the second, and know
in which zone (admin, staff pages)."""

DATETIME_FORMAT = "N j, Y, H:i:s T"
TIME_FORMAT = "H:i:s"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
