#!/bin/sh
# An engine that says everything it was given, as vLLM logs its arguments: its command line and the
# secret-bearing variables, on stdout (which fastrestartd copies into its log). Then it runs "$@" without
# the secret flags (every spelling the secrets test uses, each with all its values up to the next flag),
# which the tiny engine does not have.
echo "engine args: $*"
echo "engine env: HF_TOKEN=${HF_TOKEN:-} SECRET_B=${SECRET_B:-}"
skip=0
for a do
  shift
  case "$a" in
    --api-key | --api-keys | --apikey | --hf-token | --custom-opt) skip=1; first=1; continue ;;
    --api-key=* | --api-keys=* | --apikey=* | --hf-token=* | --custom-opt=*) skip=0; continue ;;
  esac
  if [ "$skip" = 1 ]; then
    # The value right after the name may begin with '-'; later ones end at the next flag.
    if [ "$first" = 1 ]; then first=0; continue; fi
    case "$a" in
      -*) skip=0 ;;
      *) continue ;;
    esac
  fi
  set -- "$@" "$a"
done
exec "$@"
