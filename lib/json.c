/* JSON strings; see json.h. */
#include "json.h"

#include <stdint.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at S (at most LEN bytes), or 0. */
static size_t utf8_sequence_length(const unsigned char *s, size_t len)
{
	uint32_t cp;
	size_t n, i;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (len < n)
		return 0;
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	/* Overlong forms, UTF-16 surrogates and code points past U+10FFFF
	 * are invalid, as for Python's strict decoder. */
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return n;
}

void json_string(FILE *out, const char *bytes, size_t len)
{
	const unsigned char *s = (const unsigned char *)bytes;
	size_t i = 0;

	fputc('"', out);
	while (i < len) {
		size_t n = utf8_sequence_length(s + i, len - i);

		if (n == 0) {
			fprintf(out, "\\udc%02x", s[i]);
			i++;
		} else if (n > 1) {
			fwrite(s + i, 1, n, out);
			i += n;
		} else if (s[i] == '"' || s[i] == '\\') {
			fprintf(out, "\\%c", s[i++]);
		} else if (s[i] < 0x20 || s[i] == 0x7f) {
			fprintf(out, "\\u%04x", s[i++]);
		} else {
			fputc(s[i++], out);
		}
	}
	fputc('"', out);
}

void json_puts(FILE *out, const char *text)
{
	json_string(out, text, strlen(text));
}

void json_puts_or_null(FILE *out, const char *text)
{
	if (text)
		json_puts(out, text);
	else
		fputs("null", out);
}
