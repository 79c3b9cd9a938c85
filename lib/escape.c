/* The trace format's escaping and mountinfo's unescaping; see escape.h. */
#include "escape.h"

#include <stdlib.h>
#include <string.h>

void escape_write(FILE *out, const char *bytes, size_t len, const char *extra)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)bytes[i];

		if (c <= 0x20 || c == '\\' || c == 0x7f ||
		    (extra && c && strchr(extra, c)))
			fprintf(out, "\\%03o", c);
		else
			fputc(c, out);
	}
}

void escape_puts(FILE *out, const char *text)
{
	escape_write(out, text, strlen(text), NULL);
}

char *escape_bytes(const char *bytes, size_t len)
{
	char *escaped = NULL;
	size_t size = 0;
	FILE *stream = open_memstream(&escaped, &size);

	if (!stream)
		return NULL;
	escape_write(stream, bytes, len, NULL);
	if (fclose(stream) != 0) {
		free(escaped);
		return NULL;
	}
	return escaped;
}

char *escape_string(const char *text)
{
	return escape_bytes(text, strlen(text));
}

static int is_octal(char c)
{
	return c >= '0' && c <= '7';
}

void unescape_octal(char *text)
{
	char *out = text;

	for (char *in = text; *in; in++) {
		if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' &&
		    is_octal(in[2]) && is_octal(in[3])) {
			*out++ = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 +
					(in[3] - '0'));
			in += 3;
		} else {
			*out++ = *in;
		}
	}
	*out = '\0';
}

int unescape_strict(char *text, size_t len, size_t *out_len)
{
	char *in = text, *end = text + len, *out = text;

	for (char *p = in; p < end; p++)
		if (*p == '\\' && (end - p < 4 || !is_octal(p[1]) ||
				    !is_octal(p[2]) || !is_octal(p[3])))
			return -1;
	while (in < end) {
		if (*in != '\\') {
			*out++ = *in++;
			continue;
		}
		if (in[1] > '3') {
			*out_len = (size_t)(in - text);
			return -2;
		}
		*out++ = (char)(((in[1] - '0') << 6) | ((in[2] - '0') << 3) |
				(in[3] - '0'));
		in += 4;
	}
	*out = '\0';
	*out_len = (size_t)(out - text);
	return 0;
}
