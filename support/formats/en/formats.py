"""English date formats with seconds: operations read times to the second (admin, staff pages)."""

DATETIME_FORMAT = "N j, Y, H:i:s"
TIME_FORMAT = "H:i:s"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s"
